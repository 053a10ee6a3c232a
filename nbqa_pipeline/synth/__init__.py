"""Offline NbQA synthesis (``jupiter nbqa synth``): questions over real tables, solutions run in the sandbox,
labels read from their output. See ``nbqa_pipeline.synth.run``."""
