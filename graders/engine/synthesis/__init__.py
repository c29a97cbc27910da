"""PADME synthesis, pure Python (DESIGN.md section 11): cells and contrasts, the steering
writer, rollouts, the filter cascade and the evaluator's prompts, and the arithmetic of the
funnel and the human validation. No Django: inputs and outputs are dataclasses."""
