"""The local stack: chatstream on one machine, without AWS or Docker."""
