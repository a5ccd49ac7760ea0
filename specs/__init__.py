"""The generated specs (JSON Schema, OpenAPI, snapshot format), shipped as package data."""
