"""Signals other apps listen to, so that labeling never imports them."""

from django.dispatch import Signal

# A new label was submitted through the queue, after its transaction: `project=` the Project.
label_submitted = Signal()
