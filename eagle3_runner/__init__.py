"""eagle3: from chat data to a trained EAGLE-3 draft on the patched speculators stack.

One folder per stage, in the order the data flows (``eagle3 COMMAND --help`` for each;
``eagle3 run`` chains them):

* :mod:`.prepare`   chat rows -> token rows with an assistant-token loss mask (+ frequencies):
  readers, chat templates, ``--regenerate`` / ``--synthesize`` through one vLLM engine
* :mod:`.extract`   token rows -> ``data_{i}.pt`` hidden-state samples (speculators' v1 format)
  through a backend of :mod:`.extract.backends` (``vllm``: speculators' patched generator,
  checked by :mod:`.extract.preflight`; ``vllm-fast``; ``hf``)
* :mod:`.train`     the draft vocabulary (:mod:`.train.vocab`), then samples + vocab -> a draft
  checkpoint (speculators' ``Trainer``, or :mod:`.train.loop`; torchrun in :mod:`.train.launch`)
* :mod:`.evaluate`  acceptance offline (``eagle3 eval``) and served by vLLM (:mod:`.evaluate.serve_check`)
* :mod:`.common`    what every stage shares (errors and exit codes, atomic files, sample formats,
  layer ids, the machine, the verifier's head, the draft model); it imports no stage
* :mod:`.tiny`      tiny models built offline; :mod:`.run` the TOML pipeline; :mod:`.cli` the commands

Library modules log (``logging``) and show progress (``tqdm``); only :mod:`.cli` prints.
"""

__version__ = "0.1.0"
