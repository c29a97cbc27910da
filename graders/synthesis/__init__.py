"""PADME synthesis on the Django side (DESIGN.md section 11): synthesis runs and their jobs, the
funnel, human validation and the evaluator sweep. The data rows live in labeling.models
(Synthesis, SynthesisCell, SynthesisDraw, SynthesisVote); the pure parts are in
graders/engine/synthesis."""
