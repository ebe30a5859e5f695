"""Fuzz tests (issue 10 item 5): every input is an answer or a clear, typed error."""
