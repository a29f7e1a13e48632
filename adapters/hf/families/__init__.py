"""HF transformers model families beyond Llama, Gemma and T5, each through its own modeling file's classes
(``base.py`` the shared plumbing, ``models.py`` one adapter per family)."""
