"""The default model (made once per session, tests/workers/inference) and GGUF exports of it."""

import pytest

from tests.workers.inference.conftest import default_model_dir  # noqa: F401  (fixture)
from tests.workers.models.gguf_files import export_llama
from workers.models import convert_gguf

# SmolLM2-135M-Instruct's own template, shape for shape: ChatML turns, a default system prompt, no tools.
TOOLLESS_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@pytest.fixture(scope="session")
def default_gguf(default_model_dir, tmp_path_factory):  # noqa: F811
    """The default model as an F32 GGUF with its own template (which renders tools)."""
    return export_llama(default_model_dir, tmp_path_factory.mktemp("gguf") / "default-f32.gguf")


@pytest.fixture(scope="session")
def toolless_gguf(default_model_dir, tmp_path_factory):  # noqa: F811
    """The default model as a Q8_0 GGUF whose template does not render tools (like SmolLM2's)."""
    import gguf

    return export_llama(
        default_model_dir,
        tmp_path_factory.mktemp("gguf") / "default-q8.gguf",
        chat_template=TOOLLESS_TEMPLATE,
        tensor_type=gguf.GGMLQuantizationType.Q8_0,
    )


@pytest.fixture(scope="session")
def converted_dir(default_gguf, tmp_path_factory):
    return convert_gguf(default_gguf, tmp_path_factory.mktemp("converted") / "default").path
