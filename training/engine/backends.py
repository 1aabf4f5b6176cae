"""Generation backends behind one interface.

* ``TransformersBackend``: ``model.generate`` on token ids (CPU or GPU), left padding, KV cache,
  sampling parameters, log-probs of the sampled tokens.
* ``VLLMBackend``: vLLM on token ids (GPU machines; imported only when asked for).
* ``TRLVLLMBackend``: the vLLM a TRL GRPO trainer keeps in sync (``--use_vllm``, colocated or a
  ``trl vllm-serve`` server), for the multi-turn rollouts.
* ``OpenAIChatBackend``: any OpenAI-compatible chat endpoint (``--base-url``; the key comes from
  ``$OPENAI_API_KEY`` or the variable named by ``api_key_env``), for served or frontier models
  as baselines. It sees messages, not token ids, so it records no training tokens.

Token backends implement ``generate_ids(prompts, max_new_tokens, stop_ids) -> [Completion]``;
the chat backend implements ``generate_chat(conversations, max_tokens) -> [ChatReply]``.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Callable, NamedTuple

from training.engine.batching import Completion, ContinuousBatcher, Request

# Tokens a reply may take (after any thinking), in training and evaluation alike. The expert's replies,
# which SFT teaches token for token, run to about 100 tokens with the tiny model's single-digit
# tokenizer (Thought with its arithmetic, Talk naming the product, Action); a budget below that
# truncates the replies the policy was taught into format errors. GRPO's earlier 64 cut 19% of the
# expert's builtin replies and 73% of its Amazon openings.
REPLY_TOKENS = 128


@dataclass
class SamplingConfig:
    temperature: float = field(default=0.7, metadata={"help": "0 means greedy"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling"})
    top_k: int = field(default=0, metadata={"help": "0 disables top-k"})
    max_new_tokens: int = field(default=REPLY_TOKENS, metadata={"help": "tokens per reply (after any thinking)"})
    think_tokens: int = field(default=128, metadata={"help": "cap on <think> tokens per reply (option_b)"})
    seed: int = field(default=0, metadata={"help": "generation seed"})

    def __post_init__(self):
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError("need temperature >= 0, 0 < top_p <= 1, top_k >= 0")
        if self.max_new_tokens < 1 or self.think_tokens < 1:
            raise ValueError("max_new_tokens and think_tokens must be at least 1")


@contextmanager
def greedy_decoding(backend):
    """Inside the block ``backend`` decodes greedily (temperature 0), its sampling restored after; a backend that
    generates through an inner engine (``engine``, as the RL trainer's llama.cpp policy) has that engine's
    sampling switched too."""
    held = [b for b in (backend, getattr(backend, "engine", None)) if b is not None and hasattr(b, "sampling")]
    saved = [b.sampling for b in held]
    try:
        for b in held:
            b.sampling = replace(b.sampling, temperature=0.0)
        yield backend
    finally:
        for b, s in zip(held, saved):
            b.sampling = s


class PrefixCache(NamedTuple):
    """One sequence's key/value states for its first ``length`` tokens, per layer ``(k, v)``
    with shape ``[1, kv_heads, length, head_dim]``: the next turn only feeds what is new."""

    length: int
    layers: list


class ChatReply(NamedTuple):
    text: str
    reasoning: str


class TransformersBackend:
    """Batched ``generate`` with left padding; times its forward passes for the benchmarks."""

    kind = "transformers"
    prefix_cache = True
    listener = None  # ``listener(row, token_id)`` hears each token of a one-row call as it is written (streaming)

    def __init__(self, model, tokenizer, sampling: SamplingConfig | None = None, continuous: bool = False,
                 max_rows: int = 64, prefill_dtype: str = "auto", decode_dtype: str = "auto",
                 join_fraction: float = 0.25):
        # continuous: ``stream`` serves the episodes with continuous batching (training.engine.batching).
        # Off by default: on the 2-core CPU measured (benchmarks/rl_speed.py) lockstep ``generate`` was
        # faster for a batch of 32 SmolLM2 episodes, whose time is bound by the longest episode's replies.
        self.continuous = continuous
        self.model, self.tokenizer = model, tokenizer
        self.sampling = sampling or SamplingConfig()
        self.max_rows, self.join_fraction = max_rows, join_fraction
        self.prefill_dtype, self.decode_dtype = _phase_dtype(model, prefill_dtype, "prefill"), \
            _phase_dtype(model, decode_dtype, "decode")
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.forward_seconds = 0.0
        self.calls = 0
        self._t0 = 0.0
        if model.device.type == "cpu":
            # transformers' own switch: let torch's CPU SDPA handle grouped KV heads under a padding
            # mask instead of copying K/V to every head at each decoding step (1.1-1.2x here).
            os.environ.setdefault("TRANSFORMERS_SDPA_FORCE_GQA", "1")
        model.register_forward_pre_hook(self._pre)
        model.register_forward_hook(self._post)

    def _pre(self, *_):
        self._sync()
        self._t0 = time.perf_counter()

    def _post(self, *_):
        self._sync()
        self.forward_seconds += time.perf_counter() - self._t0

    def _sync(self):
        if self.model.device.type == "cuda":
            import torch  # noqa: PLC0415
            torch.cuda.synchronize()

    def stream(self, requests: list[Request], on_done: Callable[[object, Completion], Request | None]) -> None:
        """Serve ``requests`` with continuous batching (at most ``max_rows`` rows at a time); each
        finished reply goes to ``on_done``, which may return the next request."""
        batcher = ContinuousBatcher(self.model, self.sampling, self.pad_id, self.max_rows, self.prefill_dtype,
                                    self.decode_dtype, getattr(self.model.config, "max_position_embeddings", None),
                                    self.join_fraction)
        batcher.run(requests, on_done, seed=self.sampling.seed + self.calls)
        self.calls += 1
        self.decode_steps = getattr(self, "decode_steps", 0) + batcher.steps

    def generate_ids(self, prompts: list[list[int]], max_new_tokens: int, stop_ids: list[int],
                     caches: list[PrefixCache | None] | None = None) -> list[Completion]:
        """Generate for a batch of token prompts. With ``caches`` (one per prompt, or None), the
        cached prefix of each prompt is not recomputed, and ``self.last_caches`` holds each
        sequence's new cache (prompt plus completion, except the last generated token).

        The ``caches`` passed are consumed: each layer's keys and values are dropped from them once copied into
        this call's cache, so a conversation's last cache and its new one are not held at once (25 market games
        near 8k positions in fp32: 25 x 8k positions x 30 layers x 2 x 3 heads x 64 x 4 bytes = 9.4 GB each)."""
        import torch  # noqa: PLC0415
        from transformers import StaticCache  # noqa: PLC0415

        s = self.sampling
        caches = list(caches) if caches is not None else [None] * len(prompts)
        given = [c for c in caches if c is not None]  # consumed below, trimmed or not
        if len(prompts) > 1 and all(c is None for c in caches):
            caches = self._shared_prefix(prompts) or caches
        for i, (p, c) in enumerate(zip(prompts, caches)):
            if c is not None and c.length >= len(p):  # keep at least one token to feed
                caches[i] = _trim(c, len(p) - 1) if len(p) > 1 else None
        cached = [c.length if c is not None else 0 for c in caches]
        news = [p[n:] for p, n in zip(prompts, cached)]
        big_p, big_n = max(cached), max(len(x) for x in news)
        width = big_p + big_n
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, (p, n, new) in enumerate(zip(prompts, cached, news)):
            if n:
                input_ids[i, big_p - n: big_p] = torch.tensor(p[:n], dtype=torch.long)
                attention[i, big_p - n: big_p] = 1
            input_ids[i, width - len(new):] = torch.tensor(new, dtype=torch.long)
            attention[i, width - len(new):] = 1
        device = self.model.device
        # A preallocated cache: no per-step concatenation (which dominates decoding on CPU).
        static = StaticCache(config=self.model.config, max_cache_len=width + max_new_tokens)
        if big_p:  # write each cached prefix straight into the preallocated cache, right-aligned
            ref = next(c for c in caches if c is not None)
            for li, layer in enumerate(static.layers):
                k0, v0 = ref.layers[li]
                layer.lazy_initialization(k0.new_empty((len(prompts), k0.shape[1], 1, k0.shape[3])),
                                          v0.new_empty((len(prompts), v0.shape[1], 1, v0.shape[3])))
                del k0, v0
                for i, c in enumerate(caches):
                    if c is not None:
                        layer.keys[i, :, big_p - c.length: big_p] = c.layers[li][0][0]
                        layer.values[i, :, big_p - c.length: big_p] = c.layers[li][1][0]
                layer.cumulative_length.fill_(big_p)
                for c in given + caches:  # the old layer's buffers freed before the next layer is made
                    if c is not None:
                        c.layers[li] = None
        greedy = s.temperature == 0
        # disable_compile: on a GPU, transformers compiles the forward whenever the cache is static, with CUDA graphs
        # recorded per input shape; every call here has its own width, so each one compiled anew (a market GRPO step
        # of 32 episodes took 386 s on an H200, artifacts/probes/README.md)
        kwargs = dict(do_sample=not greedy, max_new_tokens=max_new_tokens, eos_token_id=list(stop_ids),
                      pad_token_id=self.pad_id, return_dict_in_generate=True, output_logits=True,
                      past_key_values=static, disable_compile=True)
        if not greedy:
            kwargs.update(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k)
        if self.listener is not None and len(prompts) == 1:  # transformers streams one row at a time
            kwargs["streamer"] = _Streamer(self.listener)
        torch.manual_seed(s.seed + self.calls)
        self.calls += 1
        with torch.inference_mode():
            out = self.model.generate(input_ids=input_ids.to(device), attention_mask=attention.to(device), **kwargs)
            new = out.sequences[:, width:]
            # a step at a time: the steps' logits stacked are rows x steps x vocab (25 x 128 x 49,152 x 4 bytes = 630 MB)
            temp = 1.0 if greedy else s.temperature
            logp = torch.stack([torch.log_softmax(step.float() / temp, dim=-1).gather(-1, new[:, t:t + 1])[:, 0]
                                for t, step in enumerate(out.logits)], dim=1)
            del out
        new, logp = new.tolist(), logp.tolist()
        stops = set(stop_ids)
        results, self.last_caches = [], []
        for i, (ids, lps) in enumerate(zip(new, logp)):
            end = next((j for j, t in enumerate(ids) if t in stops), None)
            cut = len(ids) if end is None else end + 1
            results.append(Completion(ids[:cut], lps[:cut], end is not None))
            # This row's positions: its cached prefix, its new tokens, and all generated tokens but
            # the last (never fed back). Slices are views: no copy until the next call reads them.
            n, m, end = cached[i], len(news[i]), width + cut - 1
            spans = [(big_p - n, end)] if n == 0 or m == big_n else [(big_p - n, big_p), (width - m, end)]
            if n == 0:
                spans = [(width - m, end)]
            self.last_caches.append(PrefixCache(sum(b - a for a, b in spans), [
                (_span(layer.keys, i, spans), _span(layer.values, i, spans)) for layer in static.layers]))
        return results


    def _shared_prefix(self, prompts: list[list[int]], min_len: int = 32) -> list[PrefixCache] | None:
        """Compute the prompts' longest common prefix once and share its cache (prefix caching)."""
        import torch  # noqa: PLC0415

        first, n = prompts[0], min(len(p) for p in prompts) - 1
        for p in prompts[1:]:
            n = next((j for j in range(n) if p[j] != first[j]), n)
        if n < min_len:
            return None
        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([first[:n]], device=self.model.device), use_cache=True)
        shared = PrefixCache(n, [(k, v) for k, v, *_ in out.past_key_values])
        return [shared] * len(prompts)


def _phase_dtype(model, choice: str, phase: str):
    """The precision of one generation phase of continuous batching: ``float32``, ``bfloat16`` (through
    autocast) or ``auto``, the weights' own. CPUs differ: on one 2-core host here bf16 prefill ran at half the fp32
    rate, on another at 1.9 times it, while fp32 decoding was faster on both (``benchmarks/rl_speed.py``), so
    nothing is switched without a measurement."""
    import torch  # noqa: PLC0415

    if choice not in ("auto", "float32", "bfloat16"):
        raise ValueError(f"a {phase} precision is auto, float32 or bfloat16, got {choice!r}")
    return None if choice == "auto" else getattr(torch, choice)


def _span(t, row: int, spans: list[tuple[int, int]]):
    import torch  # noqa: PLC0415

    parts = [t[row:row + 1, :, a:b] for a, b in spans]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)


class _Streamer:
    """transformers' streamer protocol (``put`` the prompt, then each new token; ``end``) to a token listener."""

    def __init__(self, listener):
        self.listener, self.prompt_seen = listener, False

    def put(self, value) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        for token in value.reshape(-1).tolist():
            self.listener(0, int(token))

    def end(self) -> None:
        pass


def _trim(cache: PrefixCache, length: int) -> PrefixCache:
    return PrefixCache(length, [(k[:, :, :length], v[:, :, :length]) for k, v in cache.layers])


def vllm_request(s: SamplingConfig, seed: int, max_new_tokens: int, stop_ids: list[int]) -> dict:
    """One vLLM sampling request (``SamplingParams`` fields, or a ``trl vllm-serve`` request's)."""
    return {"n": 1, "temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k or -1,
            "max_tokens": max_new_tokens, "logprobs": 0, "stop_token_ids": list(stop_ids), "seed": seed,
            "skip_special_tokens": False}


def vllm_generate(llm, prompts: list[list[int]], request: dict) -> list[Completion]:
    """Token-id prompts through an in-process vLLM ``LLM``; the sampled tokens' log-probs."""
    from vllm import SamplingParams, TokensPrompt  # noqa: PLC0415

    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], SamplingParams(**request),
                        use_tqdm=False)
    results = []
    for o in outs:
        c = o.outputs[0]
        ids = list(c.token_ids)
        lps = [lp[t].logprob for t, lp in zip(ids, c.logprobs)] if c.logprobs else None
        results.append(Completion(ids, lps, c.finish_reason == "stop"))
    return results


class VLLMBackend:
    """vLLM generation on token ids (GPU machines; ``pip install vllm``)."""

    kind = "vllm"
    prefix_cache = False  # vLLM caches prefixes itself (enable_prefix_caching)

    def __init__(self, model_path: str, tokenizer, sampling: SamplingConfig | None = None, **llm_kwargs):
        try:
            from vllm import LLM  # noqa: PLC0415
        except ImportError as exc:
            raise ImportError("the vLLM backend needs `pip install vllm` on a GPU machine") from exc
        self.tokenizer = tokenizer
        self.sampling = sampling or SamplingConfig()
        self.llm = LLM(model=model_path, **llm_kwargs)
        self.calls = 0
        self.forward_seconds = 0.0

    def generate_ids(self, prompts: list[list[int]], max_new_tokens: int, stop_ids: list[int]) -> list[Completion]:
        request = vllm_request(self.sampling, self.sampling.seed + self.calls, max_new_tokens, stop_ids)
        self.calls += 1
        return vllm_generate(self.llm, prompts, request)


class TRLVLLMBackend:
    """Generation through the vLLM that TRL's ``GRPOTrainer`` keeps in step with the policy
    (``--use_vllm``; TRL pushes the new weights before every rollout). ``vllm_mode=colocate``: the
    trainer's own ``LLM`` on each process's GPU. ``vllm_mode=server``: a separate ``trl vllm-serve``;
    every process sends its own requests over HTTP (the main process through TRL's client, the
    others through a client of their own), so processes whose episodes end at different turns
    never wait on one another's generation calls."""

    kind = "trl-vllm"
    prefix_cache = False  # vLLM caches prefixes itself
    client_factory = None  # how a non-main process connects: TRL's VLLMClient unless set

    def __init__(self, trainer, sampling: SamplingConfig | None = None):
        args, gen = trainer.args, trainer.vllm_generation
        if args.vllm_mode == "colocate" and (args.vllm_tensor_parallel_size > 1 or args.vllm_enable_sleep_mode):
            raise ValueError("the multi-turn rollout engine generates per process and per turn: colocated vLLM "
                             "needs --vllm_tensor_parallel_size 1 and no --vllm_enable_sleep_mode")
        self.mode, self.tokenizer = args.vllm_mode, trainer.processing_class
        self.model = trainer.accelerator.unwrap_model(trainer.model)  # for its context length
        self.sampling = sampling or SamplingConfig()
        self.calls = 0
        self.llm = self.client = None
        if self.mode == "colocate":
            self.llm = gen.llm
        elif getattr(gen, "vllm_client", None) is not None:  # the main process: TRL's client
            self.client = gen.vllm_client
        else:
            factory = self.client_factory
            if factory is None:
                from trl.generation.vllm_client import VLLMClient as factory  # noqa: PLC0415, N813
            url = args.vllm_server_base_url or f"http://{args.vllm_server_host}:{args.vllm_server_port}"
            self.client = factory(base_url=url, connection_timeout=args.vllm_server_timeout)

    def request(self, max_new_tokens: int, stop_ids: list[int]) -> dict:
        """The sampling request of one call (what goes to vLLM, either mode)."""
        return vllm_request(self.sampling, self.sampling.seed + self.calls, max_new_tokens, stop_ids)

    def generate_ids(self, prompts: list[list[int]], max_new_tokens: int, stop_ids: list[int]) -> list[Completion]:
        req = self.request(max_new_tokens, stop_ids)
        self.calls += 1
        if self.llm is not None:
            return vllm_generate(self.llm, prompts, req)
        head = {k: req.pop(k) for k in ("n", "temperature", "top_p", "top_k", "max_tokens", "logprobs")}
        out = self.client.generate(prompts=[list(p) for p in prompts], **head, generation_kwargs=req)
        stops = set(stop_ids)
        results = []
        for ids, lps in zip(out["completion_ids"], out["logprobs"] or [None] * len(prompts)):
            ids = list(ids)
            flat = [x[0] if isinstance(x, (list, tuple)) else x for x in lps] if lps is not None else None
            results.append(Completion(ids, flat, bool(ids) and ids[-1] in stops or len(ids) < max_new_tokens))
        return results


class OpenAIChatBackend:
    """Any OpenAI-compatible ``/chat/completions`` endpoint."""

    kind = "openai"

    def __init__(self, model: str, base_url: str, api_key_env: str = "OPENAI_API_KEY",
                 sampling: SamplingConfig | None = None, timeout: float = 60.0, max_retries: int = 2):
        from openai import OpenAI  # noqa: PLC0415

        self.model = model
        self.sampling = sampling or SamplingConfig()
        key = os.environ.get(api_key_env) or "EMPTY"  # local servers accept any key
        self.client = OpenAI(base_url=base_url, api_key=key, timeout=timeout, max_retries=max_retries)

    def generate_chat(self, conversations: list[list[dict]], max_tokens: int) -> list[ChatReply]:
        """One request per conversation. A transport failure (after the client's retries) raises:
        it is not the model's answer and must not be scored as one."""
        from openai import OpenAIError  # noqa: PLC0415

        s = self.sampling
        replies = []
        for messages in conversations:
            try:
                resp = self.client.chat.completions.create(model=self.model, messages=messages, max_tokens=max_tokens,
                                                           temperature=s.temperature, top_p=s.top_p, seed=s.seed)
            except OpenAIError as exc:
                raise RuntimeError(f"chat endpoint {self.client.base_url} failed: {exc}") from exc
            msg = resp.choices[0].message if resp.choices else None
            reasoning = (getattr(msg, "reasoning_content", None) or getattr(msg, "reasoning", None)) if msg else None
            replies.append(ChatReply((msg.content if msg else None) or "",
                                     reasoning if isinstance(reasoning, str) else ""))
        return replies
