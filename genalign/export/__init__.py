"""Export: the export folder beside a checkpoint (`folder.py`), its model card
(`model_card.py`) and publishing it to the hub (`publish.py`)."""
