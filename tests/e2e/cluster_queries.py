"""What the end-to-end tests ask of a running service, for their cluster
classes to mix in: the processes' logs for a failure message, and the CLI's
JSON of the nodes and of a job. The class has `root` (where each process
writes NAME.log) and cli(*args, check=True) returning a CompletedProcess."""

import json
import os


class ClusterQueries:

    def logs(self):
        """The tail of every process's log under root, for a failure
        message."""
        text = []
        for name in sorted(os.listdir(self.root)):
            if name.endswith(".log"):
                with open(os.path.join(self.root, name)) as file:
                    text.append(f"--- {name}\n{file.read()[-4000:]}")
        return "\n".join(text)

    def nodes(self):
        """`plateau nodes` as JSON; [] while plateaud does not answer."""
        result = self.cli("nodes", "-o", "json", check=False)
        if result.returncode != 0:
            return []
        return json.loads(result.stdout).get("nodes", [])

    def describe(self, job_id):
        return json.loads(self.cli("describe", job_id, "-o", "json").stdout)
