"""vLLM's custom ops on their PyTorch-native paths (``forward_native``) on the CPU: the rotary embeddings ``get_rope``
builds (plain, linear, Llama 3, YaRN, dynamic NTK, DeepSeek YaRN, multimodal), ``RMSNorm``, ``SiluAndMul`` and
``GeluAndMul``."""
