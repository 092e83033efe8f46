"""A local OpenID Connect issuer for the local stack's JWT mode (LOCAL_STACK.md, "Sign-in")."""
