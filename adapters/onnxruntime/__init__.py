"""ONNX Runtime: ONNX graphs of one operator, built with ``onnx.helper``, run on the CPU execution provider."""
