"""plateau.Client: plateaud's Coordinator API (proto/coordinator.proto) for
Python, with the plateau CLI's verbs: submit, ls, queue, describe, logs,
cancel, nodes (drain and resume for admins) and plan, and watch and wait to
follow a job.

Every call sends the token (if any) as the CLI does, in an
`authorization: Bearer` header, and raises PlateauError on failure."""

import os
import uuid

import grpc

from plateau._proto import coordinator_pb2
from plateau._proto import coordinator_pb2_grpc
from plateau._proto import job_pb2
from plateau.config import resolve_config

FINAL_STATES = frozenset({job_pb2.JOB_STATE_SUCCEEDED,
                          job_pb2.JOB_STATE_FAILED,
                          job_pb2.JOB_STATE_CANCELLED})


class PlateauError(Exception):
    """A call plateaud refused or could not answer: `code` is the
    grpc.StatusCode (INVALID_ARGUMENT for a bad spec, one line per problem;
    NOT_FOUND for an unknown job or node; UNAUTHENTICATED or
    PERMISSION_DENIED for the token), `message` plateaud's words."""

    def __init__(self, code, message):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


class Client:
    """One connection to plateaud. The arguments are the CLI's flags
    (config.resolve_config); `timeout` bounds each call in seconds, but for
    the streams that follow a job until it ends."""

    def __init__(self, coordinator="", token="", ca_cert="",
                 allow_plaintext_token=False, timeout=60.0):
        self.config = resolve_config(coordinator, token, ca_cert,
                                     allow_plaintext_token)
        self.timeout = timeout
        if self.config.ca_cert:
            with open(self.config.ca_cert, "rb") as file:
                credentials = grpc.ssl_channel_credentials(file.read())
            self._channel = grpc.secure_channel(self.config.coordinator,
                                                credentials)
        else:
            self._channel = grpc.insecure_channel(self.config.coordinator)
        self._stub = coordinator_pb2_grpc.CoordinatorStub(self._channel)
        self._metadata = ((("authorization",
                            f"Bearer {self.config.token}"),)
                          if self.config.token else ())

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.close()

    def _call(self, method, request, timeout=-1):
        try:
            return method(request, metadata=self._metadata,
                          timeout=self.timeout if timeout == -1 else timeout)
        except grpc.RpcError as error:
            raise PlateauError(error.code(), error.details()) from None

    def _stream(self, method, request):
        try:
            yield from method(request, metadata=self._metadata)
        except grpc.RpcError as error:
            raise PlateauError(error.code(), error.details()) from None

    @staticmethod
    def _spec_source(request, spec):
        """Sets the request's spec_yaml (from a YAML file's path) or spec (a
        plateau.v1.JobSpec)."""
        if isinstance(spec, job_pb2.JobSpec):
            request.spec.CopyFrom(spec)
            return
        if not isinstance(spec, (str, os.PathLike)):
            raise TypeError(f"spec: expected a YAML file's path or a "
                            f"JobSpec, got {type(spec).__name__}")
        with open(spec) as file:
            request.spec_yaml = file.read()

    def submit(self, spec, idempotency_key=None):
        """Submits a job: `spec` is a YAML file's path or a JobSpec. A retry
        with the same idempotency_key (a fresh one by default) returns the
        job the first call created. Returns the plateau.v1.Job."""
        request = coordinator_pb2.SubmitJobRequest(
            idempotency_key=idempotency_key or uuid.uuid4().hex)
        self._spec_source(request, spec)
        return self._call(self._stub.SubmitJob, request).job

    def submit_yaml(self, text, idempotency_key=None):
        """submit() of a spec given as YAML text."""
        request = coordinator_pb2.SubmitJobRequest(
            spec_yaml=text,
            idempotency_key=idempotency_key or uuid.uuid4().hex)
        return self._call(self._stub.SubmitJob, request).job

    def ls(self, states=(), owner=""):
        """The jobs the caller may see, newest first, every page: of the
        given JobStates (all when empty) and owner (all when ""). Each is a
        summary (no spec_yaml, memory or plan; of the spec its name,
        priority, resources and steps): describe() has the whole job."""
        jobs = []
        request = coordinator_pb2.ListJobsRequest(states=states, owner=owner)
        while True:
            response = self._call(self._stub.ListJobs, request)
            jobs.extend(response.jobs)
            if not response.next_page_token:
                return jobs
            request.page_token = response.next_page_token

    def queue(self):
        """The queued jobs in the order plateaud will consider them (by
        Job.queue_position; those without a place yet last, oldest first),
        each with its wait_reason."""
        queued = self.ls(states=[job_pb2.JOB_STATE_QUEUED])
        return sorted(queued, key=lambda job: (
            job.queue_position == 0, job.queue_position,
            job.submit_time.seconds, job.submit_time.nanos, job.id))

    def describe(self, job_id):
        """The plateau.v1.Job as it is now."""
        return self._call(self._stub.GetJob,
                          coordinator_pb2.GetJobRequest(job_id=job_id))

    def logs(self, job_id, follow=False, after_sequence=0):
        """An iterator of the job's plateau.v1.LogEntry, events and worker
        lines in order (entry.event or entry.line); with follow, it stays
        open until the job ends."""
        return self._stream(self._stub.StreamLogs,
                            coordinator_pb2.StreamLogsRequest(
                                job_id=job_id, follow=follow,
                                after_sequence=after_sequence))

    def watch(self, job_id):
        """An iterator of the job as it is, then after every change (each a
        WatchJobResponse with .job and .event), until it ends."""
        return self._stream(self._stub.WatchJob,
                            coordinator_pb2.WatchJobRequest(job_id=job_id))

    def wait(self, job_id):
        """Follows the job until it ends; returns its final Job."""
        for update in self.watch(job_id):
            if update.job.state in FINAL_STATES:
                return update.job
        return self.describe(job_id)

    def cancel(self, job_id, reason=""):
        """Cancels the job; returns it (CANCELLING while its ranks stop)."""
        return self._call(self._stub.CancelJob,
                          coordinator_pb2.CancelJobRequest(job_id=job_id,
                                                           reason=reason))

    def nodes(self):
        """plateaud's nodes (plateau.v1.Node), devices and their jobs."""
        return list(self._call(self._stub.ListNodes,
                               coordinator_pb2.ListNodesRequest()).nodes)

    def drain(self, node, reason="", preempt=False):
        """Admins: the node takes no new work, keeping `reason` until
        resumed; its running jobs go on, or with `preempt` checkpoint at the
        next step and are requeued to run elsewhere. Returns the
        plateau.v1.Node."""
        return self._call(self._stub.SetNodeDrain,
                          coordinator_pb2.SetNodeDrainRequest(
                              node=node, drain=True, reason=reason,
                              preempt=preempt))

    def resume(self, node):
        """Admins: the drained node takes work again; returns it."""
        return self._call(self._stub.SetNodeDrain,
                          coordinator_pb2.SetNodeDrainRequest(node=node,
                                                              drain=False))

    def plan(self, spec, device_memory_bytes=0):
        """The memory plan of a spec (a YAML file's path or a JobSpec) as
        `plateau plan` prints it, made by plateaud for its nodes' device
        memory (or device_memory_bytes); nothing is submitted. Returns a
        PlanJobResponse: .plan (plateau.v1.MemoryPlan: fits, every rank's
        predicted peaks, the reach), .spec as planned (with schedules: auto,
        the chosen schedules) and .device_memory_bytes."""
        request = coordinator_pb2.PlanJobRequest(
            device_memory_bytes=device_memory_bytes)
        self._spec_source(request, spec)
        return self._call(self._stub.PlanJob, request)
