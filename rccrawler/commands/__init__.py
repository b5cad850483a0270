"""The command line (SPEC §3): the parser and one module per subcommand."""
