"""HF transformers: each model family's own modules (Llama, Gemma, T5)."""
