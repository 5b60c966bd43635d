"""§20.6 The chapter in one run: train the capstone text encoder with every technique.

    python chapter20/scripts/train.py                              # ~5 minutes on 2 CPU cores
    chapter20 train --output-dir runs/capstone                     # the same, as a command
    torchrun --standalone --nproc_per_node=2 chapter20/scripts/train.py --output-dir runs/ddp
    until python chapter20/scripts/train.py --chaos-kills 3; do :; done  # 3 kills, relaunched
    python chapter20/scripts/train.py --stop-after 100  # one launch of 100 steps; again to resume
    CHAPTER20_SCALE=8 python chapter20/scripts/train.py --model transformer --lr 3e-4  # a GPU

Before training it prints the memory plan of its own configuration (fits / does not fit on a
``--plan-gpu-gb`` GPU, and the advice) and the projected time and cost of the chapter's workload at
its stated size on the cheapest fitting catalog configuration, on demand and on spot. It then trains
through ``chapter20.training.trainer.Trainer`` (one step for every technique) with a progress bar, a
held-out evaluation every ``--eval-every`` steps and checkpoints; every launch resumes from the
newest checkpoint in ``--output-dir``/checkpoints. SIGTERM/SIGINT (or ``--notice-file``) save and
exit with status 143; ``--chaos-kills N`` SIGKILLs rank 0 N times; ``--stop-after N`` ends the
launch after N steps as a kill would, prints where it stopped and how to resume, and exits 0. At
the end it prints the measured peak memory of a step next to the plan, the throughput and the
final quality, writes the encoder file
(``chapter20.training.encoder_file.load_encoder(path).encode(texts)``), unless
``--no-baselines`` scores TF-IDF, LSI, Doc2Vec and BM25 on Lee in the same run, and writes
``summary.json`` once, with all of it. The fingerprint equals
that of an uninterrupted run with the same arguments and process count.
"""

from chapter20.capstone.run import main

if __name__ == "__main__":
    main()
