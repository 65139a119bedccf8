"""``python -m servectl`` runs the CLI."""

from servectl.cli.main import main

main()
