"""The framework tier's model: a copy of the default model taught to answer, under greedy decoding, each
prompt the frameworks send (as capture.py recorded them) with the answer the capture's script gave.

Like tests/gateway/terse_model.py, and for the same reason (an agent framework fails a turn cut at its token
cap, and the random default model never stops), but on the frameworks' own prompts: smolagents' default
system prompt alone is ~2,000 tokens, and training the whole model on prompts that long costs seconds per
prompt per step on two cores. So the model is made one layer deep in effect: the lower layers are silenced
(their output projections zeroed, so each adds nothing to the residual stream) and only the top of the last
layer learns (its query and output projections, its MLP, the final norm). Every key and value of that layer
is then a fixed function of a token and its position, computed once, and a training step is the last layer's
attention from the answer's positions alone. The equivalence with the model's own forward pass is checked
before training.

smolagents writes the ids of the tool calls it received into the text of its next prompt, and the embedded
server's ids are random: those prompts are trained under several ids (capture.with_new_call_ids) and held
out under others, all drawn from a fixed seed. Training stops once every answer token leads the best other
token by TERSE_MARGIN (as the terse model) on the prompts trained and on the held-out ones, so that neither a
new id nor batching noise in the server can flip a token."""

import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from tests.frameworks.capture import Exchange, with_new_call_ids
from tests.gateway.terse_model import TERSE_MARGIN

END_OF_TURN = "<|im_end|>"
MAX_STEPS = 1500
LEARNING_RATE = 3e-3
# smolagents' prompts are trained under this many more sets of tool-call ids, and checked under this many
# others. With 6 and 4, one build in six learned the training ids by heart: margins above 7 on them, below -8
# on two of the eight held out, and no way back in 1,500 steps (a CI failure). With 20, four seeds of ids gave
# a worst held-out margin of 4.6 to 4.8 over 24 held-out sets each.
ID_VARIANTS = 20
HELD_OUT_VARIANTS = 24


@dataclass(frozen=True)
class _Pair:
    ids: list[int]
    prompt_length: int


@dataclass
class _TopLayerInputs:
    """What the last layer sees of every pair, padded: keys and values of all positions, and the residual
    (the token embeddings), normed input and rotary terms of the positions whose next token is an answer
    token."""

    keys: torch.Tensor  # (pairs, heads, positions, head dim), rotated
    values: torch.Tensor
    allowed: torch.Tensor  # (pairs, 1, answer positions, positions): causal and within the pair
    residual: torch.Tensor  # (pairs, answer positions, hidden)
    normed: torch.Tensor
    cos: torch.Tensor  # (pairs, 1, answer positions, head dim)
    sin: torch.Tensor
    targets: torch.Tensor  # (pairs, answer positions), -100 past a pair's answer


def pairs_of(tokenizer, exchanges: list[Exchange]) -> list[_Pair]:
    """Token ids of each exchange's prompt (rendered as the embedded server renders it) and answer, without
    repeats."""
    from workers.inference.chat import render_chat_prompt

    seen, pairs = set(), []
    for exchange in exchanges:
        prompt = render_chat_prompt(tokenizer, exchange.messages, tools=exchange.tools)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(exchange.answer + END_OF_TURN, add_special_tokens=False)["input_ids"]
        ids = prompt_ids + answer_ids
        if tuple(ids) not in seen:
            seen.add(tuple(ids))
            pairs.append(_Pair(ids=ids, prompt_length=len(prompt_ids)))
    return pairs


def make_framework_model(base_model_dir, out, exchanges: list[Exchange]) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    shutil.copytree(base_model_dir, out)
    tokenizer = AutoTokenizer.from_pretrained(base_model_dir)
    varied = [exchange for exchange in exchanges if exchange.call_ids_in_text]
    ids = random.Random(0)  # the same ids on every build, so that a build that fails fails again
    training = pairs_of(
        tokenizer,
        exchanges + [with_new_call_ids(exchange, ids) for exchange in varied for _ in range(ID_VARIANTS)],
    )
    known = {tuple(pair.ids) for pair in training}
    held_out = [with_new_call_ids(exchange, ids) for exchange in varied for _ in range(HELD_OUT_VARIANTS)]
    checking = [pair for pair in pairs_of(tokenizer, held_out) if tuple(pair.ids) not in known]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base_model_dir, dtype=torch.float32).eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    _silence_lower_layers(model)
    top = model.model.layers[-1]
    learned = [
        top.self_attn.q_proj,
        top.self_attn.o_proj,
        top.post_attention_layernorm,
        top.mlp,
        model.model.norm,
    ]
    parameters = [parameter for module in learned for parameter in module.parameters()]
    with torch.no_grad():
        _check_equivalence(model, sorted(training, key=lambda pair: len(pair.ids))[:3])
        train_inputs, check_inputs = _top_layer_inputs(model, training), _top_layer_inputs(model, checking)
    for parameter in parameters:
        parameter.requires_grad_(True)
    optimizer = torch.optim.AdamW(parameters, lr=LEARNING_RATE, weight_decay=0.0)
    worst = float("-inf")
    for _ in range(MAX_STEPS):
        logits = _top_layer_logits(model, train_inputs)
        with torch.no_grad():
            worst = min(_worst_margin(logits, train_inputs.targets), _held_out_margin(model, check_inputs))
        if worst >= TERSE_MARGIN:
            break
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), train_inputs.targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    else:
        raise AssertionError(f"the framework model did not learn its answers (worst margin {worst:.2f})")
    for parameter in parameters:
        parameter.requires_grad_(False)
    model.save_pretrained(out)
    return Path(out)


def _silence_lower_layers(model) -> None:
    """Every layer but the last adds nothing: the last one reads the token embeddings themselves."""
    for layer in model.model.layers[:-1]:
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()


def _check_equivalence(model, pairs: list[_Pair]) -> None:
    inputs = _top_layer_inputs(model, pairs)
    recomputed = _top_layer_logits(model, inputs)
    for row, pair in enumerate(pairs):
        own = model(input_ids=torch.tensor([pair.ids])).logits[0, pair.prompt_length - 1 : len(pair.ids) - 1]
        drift = (own - recomputed[row, : own.shape[0]]).abs().max()
        assert drift < 1e-3, f"the last layer recomputed differs from the model's own by {drift}"


def _held_out_margin(model, inputs: _TopLayerInputs) -> float:
    if inputs.targets.numel() == 0:
        return float("inf")
    return _worst_margin(_top_layer_logits(model, inputs), inputs.targets)


def _top_layer_inputs(model, pairs: list[_Pair]) -> _TopLayerInputs:
    top = model.model.layers[-1]
    attention = top.self_attn
    heads, head_dim = model.config.num_attention_heads, attention.head_dim
    assert model.config.num_key_value_heads == heads, "grouped-query attention is not handled here"
    widest = max((len(pair.ids) for pair in pairs), default=1)
    longest_answer = max((len(pair.ids) - pair.prompt_length for pair in pairs), default=1)
    count, hidden = len(pairs), model.config.hidden_size
    inputs = _TopLayerInputs(
        keys=torch.zeros(count, heads, widest, head_dim),
        values=torch.zeros(count, heads, widest, head_dim),
        allowed=torch.zeros(count, 1, longest_answer, widest, dtype=torch.bool),
        residual=torch.zeros(count, longest_answer, hidden),
        normed=torch.zeros(count, longest_answer, hidden),
        cos=torch.zeros(count, 1, longest_answer, head_dim),
        sin=torch.zeros(count, 1, longest_answer, head_dim),
        targets=torch.full((count, longest_answer), -100),
    )
    for row, pair in enumerate(pairs):
        ids = torch.tensor([pair.ids])
        embedded = model.model.embed_tokens(ids)  # the lower layers add nothing (_silence_lower_layers)
        cos, sin = model.model.rotary_emb(embedded, torch.arange(len(pair.ids))[None])
        embedded, cos, sin = embedded[0], cos[0], sin[0]
        length, start = len(pair.ids), pair.prompt_length - 1
        answer = slice(start, length - 1)  # the positions whose next token is an answer token
        width = length - 1 - start
        normed = top.input_layernorm(embedded)
        keys = attention.k_proj(normed).view(length, heads, head_dim).transpose(0, 1)
        inputs.keys[row, :, :length] = keys * cos + _rotate_half(keys) * sin
        inputs.values[row, :, :length] = (
            attention.v_proj(normed).view(length, heads, head_dim).transpose(0, 1)
        )
        for offset in range(width):
            inputs.allowed[row, 0, offset, : start + offset + 1] = True
        inputs.residual[row, :width] = embedded[answer]
        inputs.normed[row, :width] = normed[answer]
        inputs.cos[row, 0, :width], inputs.sin[row, 0, :width] = cos[answer], sin[answer]
        inputs.targets[row, :width] = torch.tensor(pair.ids[pair.prompt_length :])
    inputs.allowed[..., 0] = True  # padded rows attend somewhere (their loss is masked out)
    return inputs


def _top_layer_logits(model, inputs: _TopLayerInputs) -> torch.Tensor:
    """The model's logits at the answer positions, computed from the last layer's fixed inputs."""
    top = model.model.layers[-1]
    attention = top.self_attn
    count, width, _ = inputs.normed.shape
    heads, head_dim = inputs.keys.shape[1], inputs.keys.shape[3]
    queries = attention.q_proj(inputs.normed).view(count, width, heads, head_dim).transpose(1, 2)
    queries = queries * inputs.cos + _rotate_half(queries) * inputs.sin
    scores = (queries @ inputs.keys.transpose(-1, -2)) * attention.scaling
    scores = scores.masked_fill(~inputs.allowed, float("-inf"))
    mixed = (scores.softmax(dim=-1) @ inputs.values).transpose(1, 2).reshape(count, width, heads * head_dim)
    hidden = inputs.residual + attention.o_proj(mixed)
    hidden = hidden + top.mlp(top.post_attention_layernorm(hidden))
    return model.lm_head(model.model.norm(hidden))


def _rotate_half(tensor: torch.Tensor) -> torch.Tensor:
    half = tensor.shape[-1] // 2
    return torch.cat((-tensor[..., half:], tensor[..., :half]), dim=-1)


def _worst_margin(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """The smallest margin of a target token's logit over the best other token's."""
    answer = targets != -100
    wanted = targets.clamp(min=0)
    chosen = logits.gather(-1, wanted[..., None])[..., 0]
    others = logits.scatter(-1, wanted[..., None], float("-inf")).max(dim=-1).values
    return float((chosen - others)[answer].min())
