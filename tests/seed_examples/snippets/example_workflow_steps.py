# The step-by-step ExampleWorkflow of the developer guide (seeds/000_4e0d32affe87ddca.txt), put
# together as a user following the steps would: the class of "Initialize Your Workflow", the
# methods of "Implementing the `run` method", the decorator of "Registering Your Workflow" and the
# methods of "Avoid Re-initialization". Every statement is verbatim; the imports are ours.
from typing import List

from trinity.common.experience import Experience
from trinity.common.models.model import ModelWrapper
from trinity.common.workflows import Task, Workflow

# "Registering Your Workflow":
# import some packages
from trinity.common.workflows.workflow import WORKFLOWS


@WORKFLOWS.register_module("example_workflow")
class ExampleWorkflow(Workflow):
    # "Initialize Your Workflow"
    def __init__(self, task: Task, model: ModelWrapper, auxiliary_models: List):
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        self.question = task.raw_task.get("question")
        self.answer = task.raw_task.get("answer")
        self.rollout_args = task.rollout_args
        # Optional: If you want to use OpenAI API in your workflow
        # self.openai_client = self.model.get_openai_client()

    # "Implementing the `run` method"
    def calculate_reward(self, response: str, truth: str) -> float:
        if response == truth:
            return 1.0
        else:
            return 0.0

    def run(self) -> List[Experience]:
        # call the model to generate multiple responses
        responses = self.model.chat(
            [
                {
                    "role": "user",
                    "content": f"Question:\n{self.question}",
                }
            ],
            n=self.rollout_args.n,
            temperature=self.rollout_args.temperature,
        )
        experiences = []
        for response in responses:
            # calulcate reward
            reward: float = self.calculate_reward(response.response_text, self.answer)
            # construct Experience
            experiences.append(
                Experience(
                    tokens=response.tokens,
                    prompt_length=response.prompt_length,
                    reward=reward,
                    logprobs=response.logprobs,
                )
            )
        return experiences

    # "Avoid Re-initialization"
    def resettable(self):
        return True

    def reset(self, task: Task):
        self.question = task.raw_task.get("question")
        self.answer = task.raw_task.get("answer")
