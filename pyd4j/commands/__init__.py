"""Subcommands of `pyd4j`: one module per subcommand, each exposing `command` (a click command).

Modules here import heavy dependencies (JPype, matplotlib) inside the command body, so that
`pyd4j --help` stays fast.
"""
