"""Publishing a trained policy: `fathom export` (weights, model card, manifest, optional Hub upload).

`fathom.publish.card` renders the model card; `fathom.publish.export` writes the export and uploads it.
"""
