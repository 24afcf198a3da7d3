"""Logprobs of two decode runs compared on the same token history.

Greedy decoding of a model with random weights parts between two backends as
soon as two tokens come near a tie, after which the runs see different
histories and their logprobs measure nothing. Step t of a request is therefore
compared only while the two runs generated the same tokens 0 .. t: its logprob
then comes from the same prompt and history in both (numpy only).

Random weights also put every logprob near −log(vocabulary), so an error
relative to the logprobs themselves stays small even for a wrong attention
(zeros for the decode attention: 2.1e-3 on a tiny Qwen3 in bf16, against
1.0e-4 for CoDec). The error relative to the logprobs' spread about their mean
separates them (0.71 against 0.029): both are reported.

Against the model itself (``compare_with_eager``): the logprobs a run gave
its own tokens against the model's eager forward over each checked sequence
(prompt and generated tokens), its attention in float32, every step
compared. It needs torch and the model, and is the reference for models whose attention the engine's
``paged|sdpa`` does not compute (gpt-oss's sinks, Gemma 2's soft-cap).

As a program it compares two runs of bench/e2e_decode.py backend by backend
(e.g. tensor-parallel against one GPU) and fails past a tolerance, on either
error, or when the runs share too little history to compare (a wrong
attention parts them at once: its first token, the prefill's, still agrees):
  python3 -m bench.e2e_check REF_traces.json GOT_traces.json [--max-rel-l2 2e-2] [--max-centered 0.3]"""

import argparse
import json
import sys

import numpy as np


def compare_on_shared_history(ref, got):
    """ref, got: {request: (tokens, logprobs)}, the same requests. Returns the
    steps compared, the mean shared history per request (steps), the L2 error
    of the compared logprobs relative to their norm and to their spread about
    their mean (`_centered`), and their largest absolute difference."""
    if ref.keys() != got.keys():
        raise ValueError(f"the runs hold different requests: {sorted(ref.keys() ^ got.keys())[:4]}")
    a, b, shared = [], [], []
    for k in sorted(ref):
        (tr, lr), (tg, lg) = ref[k], got[k]
        n = 0
        while n < min(len(tr), len(tg)) and tr[n] == tg[n]:
            n += 1
        a += list(lr[:n])
        b += list(lg[:n])
        shared.append(n)
    return {"steps_compared": len(a), "mean_shared_steps": float(np.mean(shared)) if shared else 0.0,
            **logprob_errors(a, b)}


def logprob_errors(ref, got):
    """The L2 error of logprobs `got` against `ref` relative to ref's norm
    and to its spread about its mean (`_centered`), and their largest
    absolute difference (all 0 for no logprobs)."""
    a, b = np.asarray(ref, dtype=np.float64), np.asarray(got, dtype=np.float64)
    err = np.linalg.norm(b - a)
    norm = np.linalg.norm(a)
    spread = np.linalg.norm(a - a.mean()) if a.size else 0.0
    return {"logprob_rel_l2": float(err / norm) if a.size and norm > 0 else 0.0,
            "logprob_rel_l2_centered": float(err / spread) if a.size and spread > 0 else 0.0,
            "logprob_max_abs": float(np.max(np.abs(b - a))) if a.size else 0.0}


EAGER_FP32 = "codec_eager_fp32"
EAGER_ROWS = 1024  # query rows an fp32 attention call takes at a time


def eager_fp32(module, query, key, value, attention_mask, **kwargs):
    """The model's own eager attention (its module's eager_attention_forward:
    sinks, soft-cap and masks as the model computes them) on float32 copies
    of q, k and v, EAGER_ROWS query rows at a time, cast back: a bf16 eager
    forward rounds every logit and probability to bf16 (gpt-oss's softmax
    runs in bf16), which at 24 layers and 8k keys moved logprobs as far as
    zeros for attention did (HISTORY.md); the rest of the model keeps its
    dtype."""
    import sys

    import torch
    attend = sys.modules[type(module).__module__].eager_attention_forward
    k, v, rows = key.float(), value.float(), query.shape[-2]
    out = [attend(module, query[:, :, i:i + EAGER_ROWS].float(), k, v,
                  None if attention_mask is None else attention_mask[:, :, i:i + EAGER_ROWS], **kwargs)[0]
           for i in range(0, rows, EAGER_ROWS)]
    return torch.cat(out, dim=1).to(query.dtype), None


def register_eager_fp32():
    """EAGER_FP32 as an attention implementation, with the eager masks."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask
    AttentionInterface.register(EAGER_FP32, eager_fp32)
    ALL_MASK_ATTENTION_FUNCTIONS.register(EAGER_FP32, eager_mask)


def eager_logprobs(model, prompt, tokens):
    """The float64 log-probabilities the model's eager forward gives `tokens`,
    generated after `prompt`: one forward over the sequence, its attention
    in float32 (eager_fp32), the logits of the generated positions alone
    (the model's attention implementation is put back after it)."""
    import torch
    implementation = model.config._attn_implementation
    register_eager_fp32()
    model.set_attn_implementation(EAGER_FP32)
    try:
        with torch.no_grad():
            ids = torch.tensor([list(prompt) + list(tokens[:-1])], device=model.device)
            logits = model(ids, logits_to_keep=len(tokens), use_cache=False).logits[0].double()
    finally:
        model.set_attn_implementation(implementation)
    return torch.log_softmax(logits, dim=-1)[torch.arange(len(tokens)), torch.tensor(tokens)].cpu().numpy()


def compare_with_eager(model, prompts, trace, sequences):
    """A run's logprobs (trace: {request: (tokens, logprobs)}) against
    eager_logprobs on the same tokens, for `sequences` requests spread over
    the trace (prompts: {request: its prompt}): every step compared."""
    requests = sorted(trace)
    picked = [requests[i] for i in np.unique(np.linspace(0, len(requests) - 1, min(sequences, len(requests)))
                                             .astype(np.int64))]
    ref = [eager_logprobs(model, prompts[r], trace[r][0]) for r in picked]
    got = [trace[r][1] for r in picked]
    return {"sequences_checked": len(picked), "steps_compared": sum(len(x) for x in got),
            **logprob_errors(np.concatenate(ref), np.concatenate(got))}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ref", help="a run's e2e_<workload>[_tp<N>]_traces.json")
    p.add_argument("got", help="another run's, of the same workload")
    p.add_argument("--max-rel-l2", type=float, default=2e-2,
                   help="the largest logprob error relative to their norm that passes (issue 15's 2e-2)")
    p.add_argument("--max-centered", type=float, default=0.3,
                   help="the largest logprob error relative to their spread that passes (on the CPU engine's tiny "
                        "bf16 Qwen3: two tensor-parallel ranks against one process 0.15, zeros for attention 0.71)")
    p.add_argument("--min-shared", type=float, default=2.0,
                   help="the least mean shared history per request, tokens (the first is the prefill's, the same "
                        "whatever the decode attention: zeros for it share 1.0; right ones shared 4.3-33 of 64 "
                        "tokens on the H200, run 21, as random weights part greedy runs at near ties)")
    a = p.parse_args(argv)
    ref, got = (json.load(open(path)) for path in (a.ref, a.got))
    common = sorted(ref.keys() & got.keys())
    if not common:
        raise SystemExit(f"{a.ref} and {a.got} share no backend ({sorted(ref)} against {sorted(got)})")
    bad = []
    for b in common:
        c = compare_on_shared_history(ref[b], got[b])
        tokens = np.mean([len(t) for t, _ in ref[b].values()])
        print(f"{b:>13} steps {c['steps_compared']:6d} (shared history {c['mean_shared_steps']:.1f} of "
              f"{tokens:.1f} tokens per request) logprob rel. L2 {c['logprob_rel_l2']:.2e}, centered "
              f"{c['logprob_rel_l2_centered']:.2e}, max abs {c['logprob_max_abs']:.2e}")
        if c["mean_shared_steps"] < a.min_shared:
            bad.append(f"{b}: shared history {c['mean_shared_steps']:.1f} < {a.min_shared} tokens per request")
        if c["logprob_rel_l2"] > a.max_rel_l2 or c["logprob_rel_l2_centered"] > a.max_centered:
            bad.append(f"{b}: logprob rel. L2 {c['logprob_rel_l2']:.2e} (max {a.max_rel_l2:.2e}), centered "
                       f"{c['logprob_rel_l2_centered']:.2e} (max {a.max_centered:.2e})")
    for line in bad:
        print(f"!! {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
