"""`python -m ortholab ...`: the same as the `ortholab` command."""

from ortholab.cli.main import main

if __name__ == "__main__":
    main()
