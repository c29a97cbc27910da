"""Active learning for grader selection (DESIGN.md section 8): which unlabeled pair an expert
should label next, and estimates that stay unbiased on labels chosen that way. Pure numpy.

- votes: each candidate grader's vote on a pair from its stored rewards, and a vote's credit.
- posterior: Beta posteriors over candidates' accuracies, P(best), entropy, labels to decide.
- acquisition: what a label on each unlabeled pair is worth (information gain about the best
  candidate, vote entropy, margin, harm potential, coverage).
- sampling: values -> selection probabilities with an epsilon share drawn uniformly, and
  priorities whose order is a random draw from them.
- estimators: inverse-propensity and LURE means over actively chosen labels.
"""
