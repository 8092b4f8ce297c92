"""Plateau's Python client: submit and follow training jobs on plateaud.

    import plateau

    client = plateau.Client()  # found and authenticated as the CLI is
    job = client.submit("spec.yaml")
    for entry in client.logs(job.id, follow=True):
        if entry.HasField("line"):
            print(entry.line.text)
    print(client.describe(job.id).state)

The messages and enums are plateau.v1's (proto/), generated for Python
when the package is built (`bazel build //client/python:plateau`, a zip to
put on PYTHONPATH): plateau.job_pb2 (Job, JobSpec, JOB_STATE_*),
node_pb2, plan_pb2 (MemoryPlan) and coordinator_pb2. Errors are
plateau.PlateauError, which carries the gRPC status code and plateaud's
message.
"""

from plateau._proto import coordinator_pb2, job_pb2, node_pb2, plan_pb2
from plateau.client import FINAL_STATES, Client, PlateauError
from plateau.config import ClientConfig, ConfigError, resolve_config

__all__ = ["Client", "ClientConfig", "ConfigError", "FINAL_STATES",
           "PlateauError", "coordinator_pb2", "job_pb2", "node_pb2",
           "plan_pb2", "resolve_config"]
