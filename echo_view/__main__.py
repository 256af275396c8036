"""``python -m echo_view`` runs the command-line interface."""

from echo_view.cli import main

raise SystemExit(main())
