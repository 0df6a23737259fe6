"""``python -m src.evidence restore``: rebuild the MLflow runs of pulled evidence folders in a store.

After ``dvc pull`` the evidence folders (:mod:`src.tracking.evidence`) hold every configuration's
run; this command restores them into the store ``mlflow ui`` reads (``$MLFLOW_TRACKING_URI``,
else the local one). A second restore adds nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from src.cli import setup_logging
from src.redact import redact_uris
from src.tracking.evidence import restore_runs
from src.tracking.store import tracking_uri


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m src.evidence", description="a run's evidence folders")
    commands = parser.add_subparsers(dest="command", required=True)
    restore = commands.add_parser("restore", help="rebuild the runs of pulled evidence folders in the store")
    restore.add_argument("--evidence", type=Path, default=Path("evidence"), help="default: evidence")
    restore.add_argument("--experiment", default=None, help="default: each folder's own experiment")
    restore.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI, else the local store")
    args = parser.parse_args(argv)
    setup_logging()
    try:
        created, skipped = restore_runs(args.evidence, args.experiment, args.tracking_uri)
    except ValueError as error:  # StoreError included
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    shown = redact_uris(tracking_uri(args.tracking_uri))
    print(f"restored {len(created)} run(s), {len(skipped)} already in {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
