"""A small capture written into the real Nsight Systems 2022.4 schema (3.0.0).

No real 2022.4 export with CUDA activity is redistributable (and none can be made without a
GPU), so the tests fill the real table definitions with rows laid out as Nsight writes them:
per process, two ``ProfilerStep#N`` NVTX ranges, each with a GEMM, an NCCL all-reduce (pre-2.19
kernel naming) and a host-to-device copy, launched from the main thread.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from tests.importers.nsys.helpers import export_2022_4, fast_connect, global_pid, global_tid

NO_STREAM = 0xFFFFFFFF
STRINGS = {
    1: "cudaLaunchKernel_v7000",
    2: "void gemm_kernel<float>(float*, int)",
    3: "gemm_kernel",
    4: "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
    5: "ncclKernel_AllReduce_RING_LL_Sum_float",
    6: "ProfilerStep#7",
    7: "ProfilerStep#8",
    8: "python3",
    9: "cudaMemcpyAsync_v3020",
    10: "cuLaunchKernel",
}
STEP = 1_000_000
T0 = 5_000_000_000


@dataclass
class Proc:
    """One process of the capture and the GPUs it drives (one step's work per GPU)."""

    pid: int
    devices: tuple[int, ...]
    context: int
    kernel_ends: dict[tuple[int, int], int] = field(default_factory=dict)  # (step, device)
    event_records: list[int] = field(default_factory=list)  # correlation ids, in order


def build(path: Path, procs: list[Proc], *, gpu_info: bool = True) -> Path:
    export_2022_4(path)
    con = fast_connect(path)
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", sorted(STRINGS.items()))
    corr = 1000
    for proc in procs:
        gpid, main = global_pid(proc.pid), global_tid(proc.pid, proc.pid)
        con.execute("INSERT INTO PROCESSES VALUES (?, ?, ?)", (gpid, proc.pid, "python3"))
        con.execute("INSERT INTO ThreadNames VALUES (?, ?, ?)", (8, 0, main))
        for step, text_id in enumerate((6, 7)):
            s = T0 + step * STEP
            con.execute(
                "INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, textId, domainId) "
                "VALUES (?, ?, 59, ?, ?, 0)",
                (s, s + 900_000, main, text_id),
            )
            con.execute(
                "INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, text, domainId) "
                "VALUES (?, ?, 59, ?, 'forward', 0)",
                (s + 1_000, s + 400_000, main),
            )
            for k, dev in enumerate(proc.devices):
                base = s + 10_000 + k * 100_000
                # GEMM on stream 7, launched by the runtime API.
                corr += 1
                _launch(con, base, main, corr, 1)
                _kernel(con, base + 5_000, 60_000, dev, 7, corr, gpid, proc.context + k, 2, 3)
                # NCCL all-reduce on stream 13, launched through the driver API.
                corr += 1
                _launch(con, base + 6_000, main, corr, 10)
                end = base + 300_000
                _kernel(con, base + 80_000, 220_000, dev, 13, corr, gpid, proc.context + k, 4, 5)
                proc.kernel_ends[(step, dev)] = end
                # A pinned host-to-device copy.
                corr += 1
                _launch(con, base + 7_000, main, corr, 9)
                con.execute(
                    "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, "
                    "streamId, correlationId, globalPid, bytes, copyKind, srcKind, dstKind) "
                    "VALUES (?, ?, ?, ?, 7, ?, ?, 4096, 1, 1, 2)",
                    (base + 70_000, base + 71_000, dev, proc.context + k, corr, gpid),
                )
                # The all-reduce's stream records CUDA event 3 (cudaEventRecord), then the host
                # waits for it (cudaEventSynchronize): the sync record has no device (Nsight
                # writes 0) and no stream; the context tells the device.
                record = corr - 1
                proc.event_records.append(record)
                con.execute(
                    "INSERT INTO CUPTI_ACTIVITY_KIND_CUDA_EVENT (deviceId, contextId, streamId, "
                    "correlationId, globalPid, eventId) VALUES (?, ?, 13, ?, ?, 3)",
                    (dev, proc.context + k, record, gpid),
                )
                corr += 1
                con.execute(
                    "INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start, end, deviceId, "
                    "contextId, streamId, correlationId, globalPid, syncType, eventId) "
                    "VALUES (?, ?, 0, ?, ?, ?, ?, 1, 3)",
                    (base + 310_000, base + 320_000, proc.context + k, NO_STREAM, corr, gpid),
                )
        con.execute(
            "INSERT INTO NVTX_EVENTS (start, eventType, globalTid, text, domainId) "
            "VALUES (?, 34, ?, 'checkpoint', 0)",
            (T0 + 950_000, main),
        )
    if gpu_info:
        for dev in sorted({d for p in procs for d in p.devices}):
            con.execute(
                "INSERT INTO TARGET_INFO_GPU (vmId, id, name, busLocation, isDiscrete, "
                "l2CacheSize, totalMemory, memoryBandwidth, clockRate, smCount, pwGpuId, uuid, "
                "luid, chipName, cuDevice, ctxswDevPath, ctrlDevPath, revision, nodeMask, "
                "constantMemory, maxIPC, maxRegistersPerBlock, maxShmemPerBlock, "
                "maxShmemPerBlockOptin, maxShmemPerSm, maxRegistersPerSm, threadsPerWarp, "
                "asyncEngines, maxWarpsPerSm, maxBlocksPerSm, maxThreadsPerBlock, maxBlockDimX, "
                "maxBlockDimY, maxBlockDimZ, maxGridDimX, maxGridDimY, maxGridDimZ, "
                "computeMajor, computeMinor, smMajor, smMinor) VALUES (1, ?, "
                "'NVIDIA A100-SXM4-80GB', '', 1, 0, 85899345920, 0, 0, 108, 0, '', 0, 'GA100', "
                "?, '', '', 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, "
                "8, 0)",
                (10 + dev, dev),
            )
    con.commit()
    con.close()
    return path


def _launch(con: sqlite3.Connection, start: int, tid: int, corr: int, name: int) -> None:
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, "
        "correlationId, nameId, returnValue) VALUES (?, ?, 0, ?, ?, ?, 0)",
        (start, start + 4_000, tid, corr, name),
    )


def _kernel(
    con: sqlite3.Connection,
    start: int,
    dur: int,
    dev: int,
    stream: int,
    corr: int,
    gpid: int,
    context: int,
    name: int,
    short: int,
) -> None:
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, "
        "correlationId, globalPid, demangledName, shortName, launchType, registersPerThread, "
        "gridX, gridY, gridZ, blockX, blockY, blockZ, staticSharedMemory, dynamicSharedMemory, "
        "localMemoryPerThread, localMemoryTotal, gridId, sharedMemoryExecuted) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 32, 108, 1, 1, 256, 1, 1, 1024, 2048, 0, 0, ?, 0)",
        (start, start + dur, dev, context, stream, corr, gpid, name, short, corr),
    )
