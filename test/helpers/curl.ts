// curl as an agent's shell runs it: a chat completion POSTed to api.openai.com with the
// placeholder as its key, the status code printed on the last line of its output.

/** Arguments for curl: the chat request with `key`, then "\n<status>" after the body. */
export function curlChatArgs(
  key: string,
  body = '{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}',
): string[] {
  return [
    "-sS",
    "-X",
    "POST",
    "https://api.openai.com/v1/chat/completions",
    "-H",
    `Authorization: Bearer ${key}`,
    "-H",
    "Content-Type: application/json",
    "-d",
    body,
    "-w",
    "\n%{http_code}",
  ];
}
