"""One module per ``jupiter`` sub-command; each defines ``add_parser(subparsers)``."""
