"""Operator tools for a deployed chatstream stack (run from a checkout, with the operator's AWS credentials)."""
