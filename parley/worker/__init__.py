"""The worker: ``wiring`` builds the client and runs Parley's workflows and activities
on a task queue; ``deploys`` is Worker Versioning for safe deploys."""
