"""Switch the sweep profile that ``dvc repro`` runs: ``python -m src.profile use paper``.

DVC expands its stages from ``params.yaml`` before anything runs, so the active profile
is a block of that file. The profiles themselves live in ``conf/profiles/{name}.yaml``;
``use`` copies one into the block between the markers (everything else in the file,
comments included, is kept), and ``show`` prints the active one.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "conf" / "profiles"
BEGIN = "# >>> sweep profile (written by `python -m src.profile use NAME`; edit conf/profiles/)"
END = "# <<< sweep profile"
BLOCK = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.DOTALL)


def available() -> list[str]:
    return sorted(p.stem for p in PROFILES.glob("*.yaml"))


def render(name: str) -> str:
    """The params.yaml block for profile ``name`` (validated: it must define ``sweep``)."""
    path = PROFILES / f"{name}.yaml"
    if not path.exists():
        raise SystemExit(f"unknown profile {name!r}; available: {', '.join(available())}")
    body = path.read_text(encoding="utf-8").strip()
    parsed = yaml.safe_load(body)
    if not isinstance(parsed, dict) or set(parsed) != {"sweep"} or parsed["sweep"].get("profile") != name:
        raise SystemExit(f"{path}: must hold exactly one `sweep:` mapping with `profile: {name}`")
    return f"{BEGIN}\n{body}\n{END}"


def use(name: str, params: Path = ROOT / "params.yaml") -> None:
    """Write profile ``name`` into the sweep block of ``params``."""
    text = params.read_text(encoding="utf-8")
    if not BLOCK.search(text):
        raise SystemExit(f"{params}: no sweep profile block between the markers {BEGIN!r} and {END!r}")
    params.write_text(BLOCK.sub(lambda _: render(name), text), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Show or switch the sweep profile in params.yaml.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("show", help="print the active profile")
    sub.add_parser("list", help="list the profiles")
    use_parser = sub.add_parser("use", help="make a profile active")
    use_parser.add_argument("name")
    use_parser.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    args = parser.parse_args(argv)
    if args.command == "list":
        print("\n".join(available()))
    elif args.command == "show":
        match = BLOCK.search((ROOT / "params.yaml").read_text(encoding="utf-8"))
        sys.stdout.write((match.group(0) if match else "no sweep block") + "\n")
    else:
        use(args.name, args.params)
        print(f"active profile: {args.name} (run `dvc repro`)")


if __name__ == "__main__":
    main()
