"""NVIDIA Megatron-Core's pure-PyTorch paths (no Transformer Engine, Apex or fused CUDA kernels) on the CPU: its
rotary embeddings (plain, linear, Llama 3, YaRN, multimodal), torch norm wrappers, MLP and activations, vocab-parallel
cross-entropy, learned position embedding, and MoE routing with its load-balancing and z losses."""
