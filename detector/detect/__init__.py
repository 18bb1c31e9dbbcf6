"""The detection framework's shared pieces: capture-quality facts and the confidence model every finding gets.

`quality.CaptureQuality` folds decoded batches into facts about the capture itself (time going backwards,
exact duplicate frames, corrupted-looking frames, snap-length truncation; one-direction capture from the flow
table); `confidence.assess` turns them, each rule's stated evidence and the other findings into a confidence
for every finding. Nothing here imports a detector.
"""
