"""Writers from the model to files: Perfetto/Chrome JSON and native Perfetto protobuf."""
