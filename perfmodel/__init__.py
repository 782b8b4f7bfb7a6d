"""perfmodel: predict, search and validate LLM training step time and memory."""
