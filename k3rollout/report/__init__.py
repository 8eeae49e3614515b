"""Reports are pure functions of the run directory: ``render(run_dir) -> text``.

``state.RunView`` folds the journal into the run's state (the engine's resume uses the
same fold, so what a report says and what resume does cannot disagree); ``result``
builds result.json from it; ``render`` writes Markdown, HTML and JSON.
"""
