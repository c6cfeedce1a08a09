"""`python -m ortholab ...` and the `ortholab` command (`console`, pyproject's script)."""

import sys


def console() -> None:
    """The command line, with a Ctrl-C while Python still imports it (a second or so: SQLAlchemy, Alembic) said in
    one line and exit code 130, as once it runs (ortholab/cli/main.py), not as an import's traceback."""
    try:
        from ortholab.cli.main import main
    except KeyboardInterrupt:
        print("ortholab: stopped by Ctrl-C", file=sys.stderr)
        sys.exit(130)
    main()


if __name__ == "__main__":
    console()
