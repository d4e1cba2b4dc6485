"""The refit oracle: searches for refits that break reforge's promise (docs/reliability.md,
"Refit oracle"). Run it with scripts/oracle.sh."""
