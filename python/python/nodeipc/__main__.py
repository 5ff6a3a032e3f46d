"""``python -m nodeipc …``: the native ``nodeipc`` program, as the console
script runs it (see :mod:`nodeipc._launcher`)."""

from ._launcher import main

if __name__ == "__main__":
    main()
