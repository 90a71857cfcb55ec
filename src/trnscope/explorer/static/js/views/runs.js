// The Runs page (#/runs): the multi-rank runs found under the served folders (views/ranks.js).
export { runsView as default } from "./ranks.js";
