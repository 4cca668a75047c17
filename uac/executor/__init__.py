"""The executor: rules (built-in and user), alerts, and read-only queries."""
