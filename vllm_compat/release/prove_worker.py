"""One architecture of ``vllm-compat prove``, in its own process (``python prove_worker.py SPEC``).

Run with ``PYTHONPATH=<managed site>`` so that speculators (patched) and vLLM come from that
site.  SPEC (JSON): ``arch``, ``model`` (a tiny model folder), ``tolerance``, ``out``.  It runs
speculators' ``VllmHiddenStatesGenerator`` as upstream documents it, on the cases below, then HF
transformers (float32) on the same tokens, with hooks: for layer id i < N the input of decoder
layer i, for id N the last layer's output before the final norm (the capture convention).  It
writes ``{"status": passed|failed|skipped, "reason", "worst", "tolerance", "cases", "module",
"errors": {case: worst}}`` to ``out``.  Standalone: imports nothing from vllm_compat.
"""

import inspect
import json
import os
import random
import sys
import time

CHUNK = 64  # max_num_batched_tokens of the chunked-prefill case (where the generator takes it)


def _cases(chunked: bool) -> dict:
    rng = random.Random(1234)

    def prompt(n):
        return [rng.randrange(3, 512) for _ in range(n)]

    cases = {"one": [prompt(37)], "ragged3": [prompt(n) for n in (50, 7, 121)],
             "ragged12": [prompt(rng.randrange(5, 160)) for _ in range(12)]}
    cases["ragged12_again"] = cases["ragged12"]
    if chunked:
        cases["chunked"] = [prompt(3 * CHUNK + 29), prompt(40), prompt(CHUNK + 1)]
    return cases


def _unrunnable(model: str) -> str | None:
    """Why the installed vLLM cannot run this model at all, or None."""
    from transformers import AutoConfig
    from vllm.model_executor.models import ModelRegistry

    import vllm

    cfg = AutoConfig.from_pretrained(model)
    archs = list(getattr(cfg, "architectures", None) or [])
    supported = set(ModelRegistry.get_supported_archs())
    if not any(a in supported for a in archs):
        return f"vLLM {vllm.__version__} has no {', '.join(archs) or 'architecture'} model"
    if getattr(cfg, "kv_lora_rank", None):  # MLA
        cpu = os.path.join(os.path.dirname(vllm.__file__), "platforms", "cpu.py")
        try:
            with open(cpu, encoding="utf-8") as fh:
                if "MLA is not supported on CPU" in fh.read():
                    return f"vLLM {vllm.__version__}'s CPU platform refuses MLA models"
        except OSError:
            pass
    return None


def _reference(model, prompts, layer_ids):
    import torch

    layers = model.model.layers
    n = len(layers)
    out = []
    for ids in prompts:
        cap = {}
        handles = []
        for i in range(n):
            def pre(mod, args, kwargs, i=i):
                h = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
                cap[i] = h[0].detach().clone()
            handles.append(layers[i].register_forward_pre_hook(pre, with_kwargs=True))

        def post(mod, args, kwargs, output):
            o = output[0] if isinstance(output, tuple) else output
            cap[n] = o[0].detach().clone()
        handles.append(layers[n - 1].register_forward_hook(post, with_kwargs=True))
        try:
            with torch.no_grad():
                model(torch.tensor([ids]))
        finally:
            for h in handles:
                h.remove()
        out.append([cap[i] for i in layer_ids])
    return out


def run(spec: dict) -> dict:
    why = _unrunnable(spec["model"])
    if why:
        return {"status": "skipped", "reason": why, "tolerance": spec["tolerance"], "cases": 0}
    import torch
    import speculators.data_generation.vllm_hidden_states_generator as vhsg
    from transformers import AutoModelForCausalLM

    gen_cls = vhsg.VllmHiddenStatesGenerator
    chunked = "max_num_batched_tokens" in inspect.signature(gen_cls.__init__).parameters
    kwargs = {"max_model_len": 2048, "gpu_memory_utilization": 0.3}
    if chunked:
        kwargs["max_num_batched_tokens"] = CHUNK
    t0 = time.perf_counter()
    generator = gen_cls(spec["model"], **kwargs)
    init_s = time.perf_counter() - t0
    layer_ids = list(generator.layer_ids)
    cases = _cases(chunked)
    got = {name: generator.generate(prompts) for name, prompts in cases.items()}
    hf = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
    hf.eval()
    tol = spec["tolerance"]
    errors, problems = {}, []
    for name, prompts in cases.items():
        results = got[name]
        if len(results) != len(prompts):
            problems.append(f"{name}: {len(results)} results for {len(prompts)} prompts")
            continue
        worst = 0.0
        for k, (res, ids, want) in enumerate(zip(results, prompts, _reference(hf, prompts, layer_ids))):
            if res["input_ids"].tolist() != ids:
                problems.append(f"{name}: result {k} is not prompt {k} (input order)")
                break
            for lid, h, ref in zip(layer_ids, res["hidden_states"], want):
                if tuple(h.shape) != tuple(ref.shape):
                    problems.append(f"{name}: prompt {k} layer {lid}: shape {tuple(h.shape)} != {tuple(ref.shape)}")
                    continue
                err = float((h.detach().to("cpu").float() - ref).norm() / ref.norm())
                worst = max(worst, err)
                if err > tol:
                    problems.append(f"{name}: prompt {k} layer {lid}: rel. error {err:.3g} > {tol:g}")
        errors[name] = worst
    for x, y in zip(got["ragged12"], got["ragged12_again"]):
        if not all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(x["hidden_states"], y["hidden_states"])):
            problems.append("the same batch twice gave different states")
            break
    return {"status": "failed" if problems else "passed", "reason": "; ".join(problems[:5]),
            "worst": max(errors.values(), default=float("nan")), "tolerance": tol, "cases": len(cases),
            "errors": errors, "layer_ids": layer_ids, "init_s": round(init_s, 1), "module": vhsg.__file__}


def main(work=None) -> int:  # noqa: ANN001
    """Run ``work`` (default :func:`run`) on the SPEC file named by argv[1], write its result."""
    with open(sys.argv[1], encoding="utf-8") as fh:
        spec = json.load(fh)
    result = (work or run)(spec)
    with open(spec["out"], "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip vLLM's slow teardown: the workers exit with their parent


if __name__ == "__main__":
    sys.exit(main())
