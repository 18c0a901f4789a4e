"""Choosing tools by what a task says: the lexical, semantic and hybrid rankings behind
``POST /v1/route`` and calls by capability, and the optional LLM re-ranking on top."""
