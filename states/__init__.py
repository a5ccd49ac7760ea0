"""The built-in machine definitions (YAML), shipped as package data."""
