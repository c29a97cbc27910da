"""Active learning on the Django side (DESIGN.md section 8): the committee built from stored
rewards and labels, the "Which grader wins" queue strategy, and the search page's panel. The
arithmetic lives in graders.engine.active."""
