"""The built-in workflow graphs (YAML) and the actions they bind."""
