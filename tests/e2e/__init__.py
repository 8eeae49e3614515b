"""End-to-end tests: whole rollouts on the simulated cluster, over real sshd, through real
ansible-playbook and kubectl, against a real slurmctld, and the report in a real browser."""
