"""Training callbacks that run ``ckptdoctor.preflight`` before each save and stop training
cleanly, with the rule's message and fixes, when the save would not fit or cannot be written,
then end it in ``DiskCheckFailed`` (exit status 1 unless caught; ``raise_on_stop=False``: not):

- ``ckptdoctor.integrations.lightning.DiskCheck`` (a Lightning ``Callback``)
- ``ckptdoctor.integrations.transformers.DiskCheckCallback`` (an HF ``TrainerCallback``)

Each module imports its framework; this package and the rest of ckptdoctor never do.
"""
