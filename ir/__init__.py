"""The BIR data model: columns, expressions, wire formats, verifier."""
