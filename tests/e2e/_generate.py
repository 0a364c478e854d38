"""Run speculators' own generator on a patched site, as upstream documents it (a subprocess).

``python _generate.py SPEC.json`` with ``PYTHONPATH=<patched site>``.  SPEC holds the model
path, the constructor keywords and the cases ``{name: [[token ids], ...]}``; the outputs go to
``SPEC["out"]`` (``torch.save``): ``{"layer_ids", "init_s", "cases": {name: {"s", "results"}}}``
where ``results`` is exactly what ``generate`` returned (moved to plain CPU tensors).
"""

import json
import os
import sys
import time


def main() -> int:
    spec = json.loads(open(sys.argv[1]).read())
    import torch
    import speculators.data_generation.vllm_hidden_states_generator as vhsg
    from speculators.data_generation.vllm_hidden_states_generator import VllmHiddenStatesGenerator

    threads = torch.get_num_threads()
    omp = os.environ.get("OMP_NUM_THREADS")
    t0 = time.perf_counter()
    generator = VllmHiddenStatesGenerator(spec["model"], **spec["kwargs"])
    out = {
        # what speculators.worker_start decided, and whether vLLM shrank this process's threads
        "omp_num_threads": [omp, os.environ.get("OMP_NUM_THREADS")],
        "threads": [threads, torch.get_num_threads()],
        "layer_ids": list(generator.layer_ids),
        "init_s": time.perf_counter() - t0,
        "module": vhsg.__file__,
        "cases": {},
    }
    for name, prompts in spec["cases"].items():
        t = time.perf_counter()
        results = generator.generate(prompts)
        out["cases"][name] = {
            "s": time.perf_counter() - t,
            "results": [
                {
                    "input_ids": r["input_ids"].clone(),
                    "hidden_states": [h.detach().to("cpu").clone() for h in r["hidden_states"]],
                }
                for r in results
            ],
        }
    torch.save(out, spec["out"])
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip the slow interpreter/engine teardown: the workers exit when their parent is gone.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
