"""Command-line interface: thin wrappers, one module per subcommand (parse -> call -> print)."""
