"""LitGPT's own modules: RoPE (plain, linear, Llama 3 and YaRN caches), RMSNorm, LayerNorm, the MLPs, causal
self-attention (soft-cap, sliding window, KV cache) and the LLaMAMoE router."""
