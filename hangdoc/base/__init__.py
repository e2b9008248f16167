"""Small helpers every floor may use: errors that teach the fix, wording, redaction, parsers."""
