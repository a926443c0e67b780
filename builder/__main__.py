import sys

try:
    from builder.cli import main
except ModuleNotFoundError as exc:  # a Python without the project's dependencies
    if (exc.name or "").partition(".")[0] == "builder":
        raise
    print(f"error: {sys.executable} lacks the builder's dependencies (no module named "
          f"{exc.name!r})\nhint: enter the project's environment: `. ci/bootstrap.sh` "
          "(once), then `. .venv/bin/activate` in a new shell", file=sys.stderr)
    raise SystemExit(2) from None

raise SystemExit(main())
